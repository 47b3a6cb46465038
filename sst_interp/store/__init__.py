"""The run directory (docs/format.md): Parquet schemas, the background RunWriter and the streaming Run reader.

```
run = Run.open(path)                       # validates the manifest fields + every shard's footer and columns
for block in run.hidden(depth=2):          # one (question, turn) at a time
    block.values                           # [positions, iterations, layers, d] float32
with RunWriter.create_or_resume(path, identity, manifest_extra) as writer:
    writer.submit(depth, question_ids, generations=rows, hidden=cols, logits=cols, sketch=cols, gates=cols)
```
"""

from typing import TYPE_CHECKING

from sst_interp.kernels.lazy import lazy_exports

if TYPE_CHECKING:
    from sst_interp.store.errors import CorruptRunError
    from sst_interp.store.reader import GateBlock, HiddenBlock, LogitBlock, Run, SketchBlock
    from sst_interp.store.schema import (
        DTYPE_KEY,
        GENERATIONS_SCHEMA,
        QUESTIONS_SCHEMA,
        SCHEMA_VERSION,
        bf16_bits_to_float32,
        float32_to_bf16_bits,
        gates_schema,
        hidden_schema,
        logits_schema,
        sketch_schema,
    )
    from sst_interp.store.space import SpaceEstimate, bytes_per_question, estimate, estimate_remaining
    from sst_interp.store.verify import VerifyReport, verify_run
    from sst_interp.store.writer import ResumeReport, RunWriter, check_out

#: Where each public name lives; imported on first use so that importing the package stays light.
_EXPORTS = {
    "CorruptRunError": "sst_interp.store.errors",
    "GateBlock": "sst_interp.store.reader",
    "HiddenBlock": "sst_interp.store.reader",
    "LogitBlock": "sst_interp.store.reader",
    "Run": "sst_interp.store.reader",
    "SketchBlock": "sst_interp.store.reader",
    "DTYPE_KEY": "sst_interp.store.schema",
    "GENERATIONS_SCHEMA": "sst_interp.store.schema",
    "QUESTIONS_SCHEMA": "sst_interp.store.schema",
    "SCHEMA_VERSION": "sst_interp.store.schema",
    "bf16_bits_to_float32": "sst_interp.store.schema",
    "float32_to_bf16_bits": "sst_interp.store.schema",
    "gates_schema": "sst_interp.store.schema",
    "hidden_schema": "sst_interp.store.schema",
    "logits_schema": "sst_interp.store.schema",
    "sketch_schema": "sst_interp.store.schema",
    "SpaceEstimate": "sst_interp.store.space",
    "bytes_per_question": "sst_interp.store.space",
    "estimate": "sst_interp.store.space",
    "estimate_remaining": "sst_interp.store.space",
    "VerifyReport": "sst_interp.store.verify",
    "verify_run": "sst_interp.store.verify",
    "ResumeReport": "sst_interp.store.writer",
    "RunWriter": "sst_interp.store.writer",
    "check_out": "sst_interp.store.writer",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "CorruptRunError",
    "DTYPE_KEY",
    "GENERATIONS_SCHEMA",
    "GateBlock",
    "HiddenBlock",
    "LogitBlock",
    "QUESTIONS_SCHEMA",
    "ResumeReport",
    "Run",
    "RunWriter",
    "SCHEMA_VERSION",
    "SketchBlock",
    "SpaceEstimate",
    "VerifyReport",
    "bf16_bits_to_float32",
    "bytes_per_question",
    "check_out",
    "estimate",
    "estimate_remaining",
    "float32_to_bf16_bits",
    "gates_schema",
    "hidden_schema",
    "logits_schema",
    "sketch_schema",
    "verify_run",
]
