"""The compute roof (``core.engines.peak``): the peak loop builds, runs each instruction set this machine has, and
refuses what it cannot measure by name. Nothing here asserts a speed: the roofline experiment measures that."""
import pytest

from dynatree_lib.core.engines import kernels, peak

needs_loop = pytest.mark.skipif(peak.unavailable() is not None, reason=str(peak.unavailable()))


@needs_loop
def test_the_loop_runs_every_instruction_set_this_machine_has():
    assert peak.isas()[0] == kernels.AVX512
    assert (kernels.AMX in peak.isas()) <= kernels.cpu_has_amx()
    for isa in peak.isas():
        for threads in (1, 2):
            gflops = peak.peak_gflops(isa, threads, seconds=0.02, repeats=1)
            assert 0.0 < gflops < 1e6, (isa, threads, gflops)  # any speed: a busy machine may starve the loop


@needs_loop
def test_an_iterations_flops_count_every_lane():
    lib = peak.library()
    assert lib.peak_flops_per_iter(0) == 12 * 16 * 2 * 2  # 12 VDPBF16PS: 16 lanes, 2 products summed, 2 flops each
    assert lib.peak_flops_per_iter(1) == 4 * 16 * 16 * 32 * 2  # 4 TDPBF16PS: 16 x 16 outputs of 32-term dots
    assert lib.peak_seconds(0, 0, 10) < 0 and lib.peak_seconds(0, 65, 10) < 0  # thread counts it refuses


def test_what_cannot_be_measured_is_refused_by_name(monkeypatch):
    with pytest.raises(ValueError, match="isa 'sse2' cannot be measured here"):
        peak.peak_gflops("sse2", 1)
    monkeypatch.setattr(kernels, "cpu_has_avx512_bf16", lambda: False)
    assert "no AVX512-BF16" in peak.unavailable_here()
