"""Run several benchmark scripts in one interpreter, so their heavy imports (torch, Lightning,
transformers) are paid once: ``run_benchmarks.py JSON`` where JSON is a list of ``[label, script
path, arguments]``.

Each script runs as ``__main__`` with its own ``sys.argv``; its output is framed by ``=== BEGIN
label`` and ``=== END label rc`` lines (rc: the script's exit status, 1 with the traceback on stderr
if it raised).
"""

import json
import runpy
import sys
import traceback
from pathlib import Path


def main() -> int:
    cases = json.loads(sys.argv[1])
    failed = 0
    for name, path, args in cases:
        print(f"=== BEGIN {name}", flush=True)
        sys.argv = [path, *args]
        sys.path.insert(0, str(Path(path).parent))
        rc = 0
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            rc = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if stop.code not in (None, 0) and not isinstance(stop.code, int):
                print(stop.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - reported per script, the others still run
            traceback.print_exc()
            rc = 1
        finally:
            sys.path.remove(str(Path(path).parent))
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"=== END {name} {rc}", flush=True)
        failed += rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
