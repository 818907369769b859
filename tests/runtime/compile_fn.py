"""A plain `torch.compile` server, never wrapped in `watch()`: strict mode (CACHEKEEPER_STRICT) covers it anyway.
Compiles `(x.sin() + 1) * 2` with Inductor (static shapes: each new shape is a recompile after a guard failure)
and calls it once per shape given; prints one JSON line: each call's refusal (strict mode's error, which Dynamo
wraps) or null, and the compile ledger's summary.

    python -m tests.runtime.compile_fn 8 16 8
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from cachekeeper.runtime import compile_ledger
from cachekeeper.runtime.strict_mode import refusal_in


def main() -> None:
    compiled = torch.compile(lambda x: (x.sin() + 1) * 2, dynamic=False)
    calls: list[dict[str, Any]] = []
    for rows in sys.argv[1:]:
        try:
            compiled(torch.ones(int(rows), 4))
            calls.append({"rows": int(rows), "refused": None})
        except Exception as exc:
            refused = refusal_in(exc)
            if refused is None:
                raise
            calls.append({"rows": int(rows), "refused": type(refused).__name__, "message": refused.message,
                          "compiled": refused.compiled, "wrapped_in": type(exc).__name__})
    print(json.dumps({"calls": calls, "ledger": compile_ledger().summary()}))


if __name__ == "__main__":
    main()
