"""scripts/benchlib.py: the machine line that every benchmark table starts from."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import benchlib  # noqa: E402

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx avx2 avx512f avx512bw

processor\t: 1
cpu family\t: 23
model\t\t: 49
flags\t\t: fpu sse4_2 avx avx2
"""


def test_cpu_info_names_family_model_and_the_widest_vector_unit_of_the_first_processor():
    assert benchlib.cpu_info(ZEN4) == {
        "model name": "AMD EPYC",
        "cpu family": "25",
        "model": "17",
        "vector": "avx512",
    }
    second = ZEN4.split("\n\n")[1]  # an AVX2-only processor
    assert benchlib.cpu_info(second) == {"cpu family": "23", "model": "49", "vector": "avx2"}
    assert benchlib.cpu_info("model name\t: Some CPU\nflags\t: fpu\n") == {"model name": "Some CPU"}


def test_machine_line_names_the_host():
    line = benchlib.machine()
    assert line.startswith(f"{benchlib.os.cpu_count()} cores (")
    assert ", Python 3." in line
    if Path("/proc/cpuinfo").exists():  # Linux: the family and model numbers are named
        info = benchlib.cpu_info(Path("/proc/cpuinfo").read_text())
        if "model" in info:
            assert f"family {info['cpu family']} model {info['model']}" in line
