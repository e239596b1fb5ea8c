"""Checks that every file of the test-data copy equals its original in ../shared/testdata."""
import hashlib
import pathlib
import sys


def digest(p: pathlib.Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> int:
    original, copy = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    files = [p for p in copy.rglob("*") if p.is_file()]
    bad = [str(p.relative_to(copy)) for p in files
           if not (original / p.relative_to(copy)).is_file() or digest(p) != digest(original / p.relative_to(copy))]
    print(f"{len(files)} files compared, {len(bad)} differ")
    for b in bad:
        print("differs:", b)
    return 1 if bad or not files else 0


if __name__ == "__main__":
    sys.exit(main())
