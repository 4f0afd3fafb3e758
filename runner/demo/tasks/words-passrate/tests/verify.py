import json
import sys

sys.path.insert(0, "/app")
try:
    import words
except Exception as exc:  # noqa: BLE001
    print("import failed:", exc)
    words = None
cases = [
    "words.count_words('a b  c') == 3",
    "words.count_words('') == 0",
    "words.longest('aa bbb cc') == 'bbb'",
    "words.longest('') == ''",
    "words.capitalize_all('hello big world') == 'Hello Big World'",
]
ok = 0
for expr in cases:
    try:
        good = words is not None and bool(eval(expr))
    except Exception as exc:  # noqa: BLE001
        good = False
        print(expr, "error", repr(exc))
    print(("PASS " if good else "FAIL ") + expr)
    ok += good
rate = round(ok / len(cases), 4)
# Like rust-java-lsp: only pass_rate, no partial_score.
json.dump({"pass_rate": rate}, open("/logs/verifier/metrics.json", "w"))
open("/logs/verifier/reward.txt", "w").write("1" if ok == len(cases) else "0")
print("pass_rate", rate)
