# Makes `support.*` importable when the mock self-tests run directly (pytest test/support).
import sys
from pathlib import Path

_TEST_DIR = str(Path(__file__).resolve().parent.parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)
