"""The kernels package stands alone: importing it loads no other part of videogen."""

import subprocess
import sys


def test_importing_the_kernels_loads_no_other_videogen_module():
    code = (
        "import sys, videogen.kernels\n"
        "others = sorted(m for m in sys.modules if m.startswith('videogen.') and not m.startswith('videogen.kernels'))\n"
        "print(others)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
