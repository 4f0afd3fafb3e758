import compileall
import json
import sys

# The "build": compile every module the agent wrote, like cargo build before cargo test.
built = compileall.compile_dir("/app/src", quiet=1, force=True)
metrics_path = "/logs/verifier/metrics.json"
if not built:
    print("BUILD FAILED")
    json.dump({"phase": "build_failed", "passed": 0, "failed": 0, "partial_score": 0.0},
              open(metrics_path, "w"))
    open("/logs/verifier/reward.txt", "w").write("0")
    sys.exit(1)
sys.path.insert(0, "/app/src")
import shapes  # noqa: E402

cases = ["shapes.area_square(3) == 9", "shapes.area_rect(2, 5) == 10", "shapes.perimeter_rect(2, 5) == 14"]
passed = 0
for expr in cases:
    try:
        good = bool(eval(expr))
    except Exception as exc:  # noqa: BLE001
        good = False
        print(expr, "error", repr(exc))
    print(("PASS " if good else "FAIL ") + expr)
    passed += good
failed = len(cases) - passed
# Like the cargo tasks: passed/failed without total.
json.dump({"phase": "done", "passed": passed, "failed": failed, "partial_score": round(passed / len(cases), 4)},
          open(metrics_path, "w"))
open("/logs/verifier/reward.txt", "w").write("1" if failed == 0 else "0")
