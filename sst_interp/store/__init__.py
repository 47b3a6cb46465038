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

from sst_interp.kernels.lazy import lazy_exports, typed_exports

if TYPE_CHECKING:
    from sst_interp.store.blocks import GateBlock, HiddenBlock, LogitBlock, SketchBlock
    from sst_interp.store.errors import CorruptRunError
    from sst_interp.store.reader import Run
    from sst_interp.store.resume import ResumeReport
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
    from sst_interp.store.writer import RunWriter, check_out

#: The public names are the `if TYPE_CHECKING:` imports above, each imported from its module on first use
#: (sst_interp.kernels.lazy), so importing the package stays light.
_EXPORTS = typed_exports(__name__)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
