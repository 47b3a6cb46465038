"""CodeACT episodes (paper app:dataset_format, sec:evaluation): the conversation format and the episode loop.

A CodeACT episode is a multi-turn conversation: the model writes Python between ``<execute>`` and
``</execute>``, a sandboxed interpreter (:mod:`sst_interp.sandbox`) runs it, its output comes back as a
``<tool_response>`` user turn, and the episode ends when the model calls ``finish_session("...")``.

- :mod:`sst_interp.codeact.format`: the exact strings and their tokenisation (shared with training);
- :mod:`sst_interp.codeact.prompts`: the zero-shot system text per question source;
- :mod:`sst_interp.codeact.episode`: the loop that advances a batch of episodes turn by turn;
- :mod:`sst_interp.codeact.grading`: grading an episode's final answer.

Import the submodules directly (``from sst_interp.codeact.episode import run_episodes``); this package's top level
holds only the format, so training can use it without loading the generation stack.
"""
