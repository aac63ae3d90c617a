"""memoryd.model.secrets against detect-secrets on the planted set of tests/secret_samples.py.

Recall (planted secrets found) and precision (of the samples flagged, how many hold a secret),
start-up (a fresh interpreter importing the scanner and scanning one line) and scan time (the
planted set, and a 1 MiB memory body). detect-secrets is not a dependency of memoryd:

    pip install detect-secrets && python bench/bench_secrets.py
"""

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memoryd.model import secrets  # noqa: E402
from tests.secret_samples import NEGATIVES, POSITIVES  # noqa: E402

Scanner = Callable[[str], int]  # text -> number of findings


def ours(text: str) -> int:
    return len(secrets.find(text))


def _detect_secrets() -> Scanner | None:
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="bench-secrets-"))

    def scan(text: str) -> int:
        # A file scan, as `detect-secrets scan` runs it: with its default plugins and filters
        # (scan_line, for ad-hoc strings, reports every high-entropy word unfiltered).
        path = folder / "memory.md"
        path.write_text(text)
        found = SecretsCollection()
        with default_settings():
            found.scan_file(str(path))
        return sum(len(v) for _, v in found.data.items())

    return scan


def _timed(fn: Callable[[], object], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _startup(code: str, repeat: int = 5) -> float:
    def run() -> None:
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

    return _timed(run, repeat)


def score(scan: Scanner) -> dict[str, float]:
    texts = [tpl.format(value) for _, value, tpl in POSITIVES]
    tp = sum(1 for t in texts if scan(t))
    fp = sum(1 for n in NEGATIVES if scan(n))
    missed = [kind for (kind, _, _), t in zip(POSITIVES, texts, strict=True) if not scan(t)]
    flagged = [n[:50] for n in NEGATIVES if scan(n)]
    return {
        "recall": tp / len(texts),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "tp": tp,
        "fp": fp,
        "missed": missed,  # type: ignore[dict-item]
        "flagged": flagged,  # type: ignore[dict-item]
    }


def main() -> None:
    planted = "\n".join([tpl.format(v) for _, v, tpl in POSITIVES] + NEGATIVES) + "\n"
    # 1 MiB of prose full of the words the patterns key on (token, key, password, sk-, eyJ).
    prose = (
        "The api key and the access token rotate; password: see the vault. sk-learn eyJ "
        "AKIA docs say ghp_ tokens expire. " * 8 + "\n"
    )
    big = (prose * ((1 << 20) // len(prose) + 1))[: 1 << 20]
    engines: list[tuple[str, Scanner, str]] = [
        (
            "memoryd.model.secrets",
            ours,
            "from memoryd.model import secrets; secrets.find('password = x1Y2z3W4v5')",
        ),
    ]
    ds = _detect_secrets()
    if ds is not None:
        engines.append(
            (
                "detect-secrets",
                ds,
                "import tempfile, pathlib\n"
                "from detect_secrets import SecretsCollection\n"
                "from detect_secrets.settings import default_settings\n"
                "p = pathlib.Path(tempfile.mkdtemp()) / 'm.md'\n"
                "p.write_text('password = x1Y2z3W4v5')\n"
                "c = SecretsCollection()\n"
                "with default_settings(): c.scan_file(str(p))",
            )
        )
    else:
        print("detect-secrets is not installed: only memoryd.model.secrets is measured")
    baseline = _startup("pass")
    print(
        f"{'engine':<18}{'recall':>8}{'precision':>11}{'start-up':>11}{'planted':>10}{'1 MiB':>10}"
    )
    for name, scan, code in engines:
        s = score(scan)
        start = _startup(code) - baseline
        planted_t = _timed(lambda scan=scan: scan(planted))  # type: ignore[misc]
        big_t = _timed(lambda scan=scan: scan(big), repeat=3)  # type: ignore[misc]
        print(
            f"{name:<18}{s['recall']:>8.2f}{s['precision']:>11.2f}{start * 1000:>9.0f}ms"
            f"{planted_t * 1000:>8.1f}ms{big_t * 1000:>8.0f}ms"
        )
        if s["missed"]:
            print(f"  missed: {', '.join(s['missed'])}")  # type: ignore[arg-type]
        for line in s["flagged"]:  # type: ignore[attr-defined]
            print(f"  false positive: {line}")
    print(f"(start-up is over a bare interpreter's, {baseline * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
