"""A qmodel entry stored as a ggml type (lb_qmodel_set_ggml, set for every
tensor by lb_gguf_choose) evaluates as what lb_export_gguf writes: its
lb_qmodel_values_f32 equal the written GGUF tensor dequantized by the gguf
package, bit for bit, so ppl/kld on the qmodel measure the file."""
import ctypes
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import lowbit_ctypes as lb  # noqa: E402

STORIES = pathlib.Path(__file__).resolve().parents[2] / "models/stories260K.bin"


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_0", "MXFP4_MOE", "F16", "BF16"])
def test_values_are_the_file(tmp_path, ftype):
    gguf = pytest.importorskip("gguf")
    out = tmp_path / "m.gguf"
    pure = ftype == "MXFP4_MOE"  # the MXFP4_MOE mix of a dense model is Q8_0: --pure reaches mxfp4
    o = lb.GGUFOptions(type=ftype.encode(), pure=int(pure), threads=2)
    with lb.QModel(STORIES) as q:
        lb.check(lb.lib.lb_gguf_choose(q.h, ctypes.byref(o), None), "choose")
        lb.check(lb.lib.lb_export_gguf(q.h, str(out).encode(), ctypes.byref(o), None), "export")
        tensors = {t.name: t for t in gguf.GGUFReader(str(out)).tensors}
        seen = set()
        for i in range(len(q)):
            buf = ctypes.create_string_buffer(128)
            lb.check(lb.lib.lb_qmodel_gguf_name(q.h, i, buf, 128), "name")
            t = tensors[buf.value.decode()]
            want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(q.shape(i))
            got = q.values(i, threads=2)
            np.testing.assert_array_equal(got, want, err_msg=buf.value.decode())
            seen.add(t.tensor_type.name)
        assert {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "MXFP4_MOE": "MXFP4", "F16": "F16", "BF16": "BF16"}[ftype] in seen


def test_set_ggml_refuses_a_row_the_block_does_not_fit():
    with lb.QModel(STORIES) as q:
        i = q.index("model.layers.0.mlp.down_proj.weight")  # rows of 172
        assert lb.lib.lb_qmodel_set_ggml(q.h, i, 16) == lb.LB_ERR_ARG  # LB_DT_Q8_0
        assert b"172" in lb.lib.lb_last_error()
        assert lb.lib.lb_qmodel_set_ggml(q.h, i, 1) == lb.LB_OK  # LB_DT_F16
        assert q.entry(i).ggml == 1
        x = q.source(i)
        np.testing.assert_array_equal(q.values(i), x.astype(np.float16).astype(np.float32))
