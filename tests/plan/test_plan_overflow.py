"""lowbit plan with huge config values (issue 12 item 8): refused naming the value, never a wrapped-around
figure (negative GB) with exit 0."""
import json
import math
import subprocess

import pytest

from test_plan import plan, write_config  # noqa: F401

import model_lib as ml  # noqa: E402

U64_MAX = 2**64 - 1


@pytest.mark.parametrize("field,value", [
    ("num_hidden_layers", 2**62), ("hidden_size", 2**40), ("num_attention_heads", 2**50),
    ("intermediate_size", U64_MAX), ("vocab_size", U64_MAX), ("head_dim", 2**62),
])
def test_huge_config_values_are_refused_naming_them(tmp_path, field, value):
    fields = {field: value}
    if field == "num_attention_heads":
        fields["num_key_value_heads"], fields["head_dim"] = value, 128
    p = plan(write_config(tmp_path, **fields), check=False)
    assert p.returncode in (1, 2), p.stdout
    err = json.loads(p.stdout)["error"]["message"]
    assert "overflows 64-bit arithmetic" in err and f"{field} {value}" in err, err
    assert "config.json" in err


def test_more_heads_than_hidden_size_is_refused(tmp_path):
    p = plan(write_config(tmp_path, num_attention_heads=2**33, num_key_value_heads=2**33), check=False)
    assert p.returncode == 1 and "head_dim is 0" in p.stdout and "num_attention_heads 8589934592" in p.stdout


def test_huge_experts_are_refused(tmp_path):
    p = plan(write_config(tmp_path, num_experts=2**40, num_experts_per_tok=2, moe_intermediate_size=2**30),
             check=False)
    assert p.returncode == 1 and "overflows 64-bit arithmetic" in p.stdout and "num_experts 1099511627776" in p.stdout


def test_largest_context_and_batch_give_finite_positive_figures(tmp_path):
    out = plan(write_config(tmp_path, num_hidden_layers=100000, hidden_size=65536, intermediate_size=2**20),
               "--ctx", 2**32, "--batch", 2**24)

    def walk(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from walk(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield v
    nums = list(walk(out))
    assert nums and all(math.isfinite(x) for x in nums)
    assert out["parameters"]["total"] > 0 and out["weights"]["bytes"] > 0 and out["kv"]["bytes_per_sequence"] > 0
    assert out["memory"]["fits"] is False and out["memory"]["max_batch"] == 0


@pytest.mark.parametrize("opt,value", [("--ctx", 2**32 + 1), ("--batch", 2**24 + 1), ("--ctx", U64_MAX + 1)])
def test_context_and_batch_beyond_range_are_usage_errors(opt, value):
    p = subprocess.run([ml.LOWBIT, "plan", "llama-3-8b", opt, str(value)], capture_output=True, text=True)
    assert p.returncode == 2 and opt in p.stderr and str(value) in p.stderr
