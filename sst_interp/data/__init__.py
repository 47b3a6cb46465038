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

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.data.demo import load_demo
    from sst_interp.data.gpqa import load_gpqa
    from sst_interp.data.grading import GRADERS, GradeResult, Judge, grade
    from sst_interp.data.loaders import load_gsm8k, load_humaneval, load_math500
    from sst_interp.data.prompts import MAX_NEW_TOKENS, STOP_STRINGS, default_max_new_tokens, stop_strings, truncate_at_stop
    from sst_interp.data.question import QUESTION_COLUMNS, Question, frame_to_questions, questions_to_frame
    from sst_interp.data.registry import data_file, known_sources, load_questions

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
