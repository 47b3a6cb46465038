"""Question sources, zero-shot prompts and graders.

>>> from sst_interp.data import load_questions, grade, questions_to_frame
>>> questions = load_questions("demo", limit=2)
>>> grade(questions[0], " 42").grader
'exact'

Modules: :mod:`~sst_interp.data.question` (the record and its table), :mod:`~sst_interp.data.prompts`
(templates, stop strings), :mod:`~sst_interp.data.demo`, :mod:`~sst_interp.data.loaders`,
:mod:`~sst_interp.data.gpqa`, :mod:`~sst_interp.data.files` (path lookup),
:mod:`~sst_interp.data.registry` (``load_questions``), :mod:`~sst_interp.data.grading`,
:mod:`~sst_interp.data.answers`, :mod:`~sst_interp.data.math_answer`, :mod:`~sst_interp.data.code_exec`.
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports

if TYPE_CHECKING:
    from sst_interp.data.demo import load_demo
    from sst_interp.data.gpqa import load_gpqa
    from sst_interp.data.grading import GRADERS, GradeResult, Judge, grade
    from sst_interp.data.loaders import load_gsm8k, load_humaneval, load_math500
    from sst_interp.data.prompts import MAX_NEW_TOKENS, STOP_STRINGS, default_max_new_tokens, stop_strings, truncate_at_stop
    from sst_interp.data.question import QUESTION_COLUMNS, Question, frame_to_questions, questions_to_frame
    from sst_interp.data.registry import data_file, known_sources, load_questions

#: Where each public name lives; imported on first use so that importing the package stays light.
_EXPORTS = {
    "load_demo": "sst_interp.data.demo",
    "load_gpqa": "sst_interp.data.gpqa",
    "GRADERS": "sst_interp.data.grading",
    "GradeResult": "sst_interp.data.grading",
    "Judge": "sst_interp.data.grading",
    "grade": "sst_interp.data.grading",
    "load_gsm8k": "sst_interp.data.loaders",
    "load_humaneval": "sst_interp.data.loaders",
    "load_math500": "sst_interp.data.loaders",
    "MAX_NEW_TOKENS": "sst_interp.data.prompts",
    "STOP_STRINGS": "sst_interp.data.prompts",
    "default_max_new_tokens": "sst_interp.data.prompts",
    "stop_strings": "sst_interp.data.prompts",
    "truncate_at_stop": "sst_interp.data.prompts",
    "QUESTION_COLUMNS": "sst_interp.data.question",
    "Question": "sst_interp.data.question",
    "frame_to_questions": "sst_interp.data.question",
    "questions_to_frame": "sst_interp.data.question",
    "data_file": "sst_interp.data.registry",
    "known_sources": "sst_interp.data.registry",
    "load_questions": "sst_interp.data.registry",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "GRADERS",
    "QUESTION_COLUMNS",
    "STOP_STRINGS",
    "GradeResult",
    "Judge",
    "Question",
    "data_file",
    "frame_to_questions",
    "grade",
    "known_sources",
    "load_demo",
    "load_gpqa",
    "load_gsm8k",
    "load_humaneval",
    "load_math500",
    "load_questions",
    "questions_to_frame",
    "stop_strings",
    "default_max_new_tokens",
    "MAX_NEW_TOKENS",
    "truncate_at_stop",
]
