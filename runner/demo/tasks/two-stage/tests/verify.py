import json
import os
import sys

sys.path.insert(0, "/app")
metrics_path = "/logs/verifier/metrics.json"
try:
    import kv
except Exception as exc:  # noqa: BLE001
    print("import failed:", exc)
    kv = None


def run_gate(name, exprs):
    passed = 0
    for expr in exprs:
        try:
            good = kv is not None and bool(eval(expr))
        except Exception as exc:  # noqa: BLE001
            good = False
            print(expr, "error", repr(exc))
        print(f"[{name}] " + ("PASS " if good else "FAIL ") + expr)
        passed += good
    return {"passed": passed, "failed": len(exprs) - passed, "total": len(exprs)}


gates = {
    "put_get": run_gate("put_get", ["kv.put('a', 1) is None", "kv.get('a') == 1", "kv.get('zz') is None"]),
    "delete": run_gate("delete", ["kv.put('d', 2) is None", "kv.delete('d') is None", "kv.get('d') is None"]),
    "keys": run_gate("keys", ["kv.put('b', 1) is None", "kv.keys() == sorted(kv.keys())", "'b' in kv.keys()"]),
}
gates_passed = sum(1 for g in gates.values() if g["failed"] == 0)
correctness_reward = 1 if gates_passed == len(gates) else 0
stage1 = {
    "stage": "correctness",
    "pytest": gates,
    "gates_passed": gates_passed,
    "gates_total": len(gates),
    "partial_score": round(gates_passed / len(gates), 4),
    "stage_note": "trial reward is 0.5 * this stage's reward + 0.5 * ux stage's reward",
    "reward": correctness_reward,
}
json.dump(stage1, open(metrics_path, "w"))
# Stage 2 (the "ux" stage), then the blend overwrites partial_score with binary sub-scores.
ux = 1 if os.path.exists("/app/STATUS") and open("/app/STATUS").read().strip() == "ready" else 0
print("ux stage:", "PASS" if ux else "FAIL")
final = dict(stage1)
final.update({
    "scoring_mode": "binary",
    "correctness_reward": correctness_reward,
    "unit_tests_score": correctness_reward,
    "ux_reward": ux,
    "cua_rubric_score": ux,
    "partial_score": 0.5 * correctness_reward + 0.5 * ux,
    "partial_score_formula": "0.5 * unit_tests_score + 0.5 * cua_rubric_score",
    "reward": 1 if correctness_reward and ux else 0,
})
json.dump(final, open(metrics_path, "w"))
json.dump({"reward": final["reward"], "correctness": correctness_reward, "ux": ux},
          open("/logs/verifier/reward.json", "w"))
print(json.dumps(final))
