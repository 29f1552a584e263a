"""``npu nem bind`` on programs too large for the engine or for a memory image (issue 24):
a DDR buffer past the engine's 32-bit AXI address space is a BindError (it was bound to
addresses the engine cannot reach, without a word), and an image of more than
``MAX_IMAGE_BYTES`` is a MemoryImageError before anything is allocated (a 5 GB buffer took
4.9 GB of memory). Expected byte ranges are the buffer sizes written in the sources."""

import resource
import shutil
from pathlib import Path

import pytest

from nem.memimage import MAX_IMAGE_BYTES
from nem.taskformat import DDR_ADDRESS_BITS

PROGRAMS = Path(__file__).parents[1] / "nem_executor" / "programs"


def _program(tmp_path, ddr_size):
    shutil.copy(PROGRAMS / "exec_device.nem", tmp_path / "exec_device.nem")
    src = tmp_path / "big.nem"
    src.write_text(
        'device "exec_device.nem"\nprogram big:\n'
        f"buffer D : DDR (size={ddr_size})\nbuffer S : L2 (size=64)\n"
        f"t1 = transfer.async(dst=region(S, 0, 64), src=region(D, {ddr_size - 64}, 64))\n"
    )
    return src


def _limited(fn):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), hard))
    try:
        return fn()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("image", [False, True])
def test_ddr_past_the_address_space(tmp_path, capsys, image):
    from npu.tools.cli import main

    assert DDR_ADDRESS_BITS == 32
    src = _program(tmp_path, 5_000_000_000)
    argv = ["nem", "bind", str(src), "-o", str(tmp_path / "big.bin")]
    if image:
        argv += ["--image", str(tmp_path / "big.safetensors")]
    assert _limited(lambda: main(argv)) == 1
    assert ("npu: error: buffer D: DDR bytes [0, 5000000000) lie past the engine's 32-bit "
            "address space (4294967296 bytes)") in capsys.readouterr().err
    assert not (tmp_path / "big.bin").exists()


def test_image_over_the_cap(tmp_path, capsys):
    from npu.tools.cli import main

    size = 2 * MAX_IMAGE_BYTES  # inside the address space, over the image cap
    src = _program(tmp_path, size)
    argv = ["nem", "bind", str(src), "-o", str(tmp_path / "big.bin"), "--image",
            str(tmp_path / "big.safetensors")]
    assert _limited(lambda: main(argv)) == 1
    assert (f"npu: error: the buffers hold {size + 64} bytes (largest: D, {size} bytes); a "
            f"memory image is built for at most {MAX_IMAGE_BYTES}") in capsys.readouterr().err
    # Without --image the same program binds: addresses fit in 32 bits.
    assert main(argv[:5]) == 0
    capsys.readouterr()
