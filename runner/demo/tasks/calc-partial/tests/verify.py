import importlib.util
import json
import sys

sys.path.insert(0, "/app")
checks = {
    "add": "calc.add(2, 3) == 5",
    "sub": "calc.sub(5, 3) == 2",
    "mul": "calc.mul(4, 3) == 12",
    "div": "calc.div(8, 2) == 4",
    "div_zero": "raises_zero(lambda: calc.div(1, 0))",
}


def raises_zero(fn):
    try:
        fn()
    except ZeroDivisionError:
        return True
    return False


passed = failed = 0
calc = None
if importlib.util.find_spec("calc") is not None:
    try:
        import calc
    except Exception as exc:  # noqa: BLE001
        print("import failed:", exc)
for name, expr in checks.items():
    try:
        ok = calc is not None and bool(eval(expr))
    except Exception as exc:  # noqa: BLE001
        ok = False
        print(f"{name}: error {exc!r}")
    print(f"{name}: {'PASS' if ok else 'FAIL'}")
    passed += ok
    failed += not ok
total = passed + failed
metrics = {"passed": passed, "failed": failed, "total": total, "partial_score": round(passed / total, 4)}
json.dump(metrics, open("/logs/verifier/metrics.json", "w"))
open("/logs/verifier/reward.txt", "w").write("1" if failed == 0 else "0")
print(json.dumps(metrics))
