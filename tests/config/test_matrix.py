"""Expanding a valid config into matrix entries: contents, order, defaults, guidance, tp, filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachekeeper.config import MatrixEntry, ModelMatrix
from cachekeeper.errors import ConfigError
from cachekeeper.format.spec import EntrySpec, ModelRef, Shape

from .util import EXAMPLE, minimal, parse


def labels(entries: list[MatrixEntry]) -> list[str]:
    return [e.spec.label() for e in entries]


def test_example_expands_to_the_product_in_file_then_sorted_order() -> None:
    assert labels(parse(EXAMPLE).entries()) == [
        "tiny-flux/transformer inductor:full 64x64x1 float32",
        "tiny-flux/transformer inductor:full 64x64x2 float32",
        "tiny-flux/transformer inductor:full 128x64x1 float32",
        "tiny-flux/transformer inductor:full 128x64x2 float32",
        # eager modes warm up the whole pipeline by default (issue 7): that is in the key
        "flux-dev/transformer neuron:eager 768x1360x4 bfloat16,guidance=on,tp=2,warmup=pipeline",
        "flux-dev/transformer neuron:eager 1024x1024x2 bfloat16,guidance=on,tp=2,warmup=pipeline",
        "flux-dev/transformer neuron:full 768x1360x4 bfloat16,tp=2",
        "flux-dev/transformer neuron:full 1024x1024x2 bfloat16,tp=2",
        "flux-dev/transformer tpu:defer_and_fuse 768x1360x4 bfloat16,guidance=on,tp=2,warmup=pipeline",
        "flux-dev/transformer tpu:defer_and_fuse 1024x1024x2 bfloat16,guidance=on,tp=2,warmup=pipeline",
    ]


def test_example_entries_carry_full_specs_and_model_refs() -> None:
    first, *_, last = parse(EXAMPLE).entries()
    assert first == MatrixEntry(
        spec=EntrySpec(model="tiny-flux", component="transformer", backend="inductor", mode="full",
                       shape=Shape(64, 64, 1), dtype="float32"),
        model=ModelRef(name="tiny-flux", component="transformer", path="/cfgdir/models/tiny-flux"),
    )
    assert last.spec == EntrySpec(model="flux-dev", component="transformer", backend="tpu", mode="defer_and_fuse",
                                  shape=Shape(1024, 1024, 2), dtype="bfloat16", revision="0123456",
                                  options=(("guidance", "on"), ("tp", "2"), ("warmup", "pipeline")))
    assert last.model == ModelRef(name="flux-dev", component="transformer", hub="black-forest-labs/FLUX.1-dev",
                                  revision="0123456", tensor_parallel=2, guidance=True)


def test_example_keys_are_distinct() -> None:
    keys = [e.spec.key for e in parse(EXAMPLE).entries()]
    assert len(set(keys)) == len(keys) == 10


def test_top_level_settings_are_read() -> None:
    config = parse(EXAMPLE)
    assert config.store == "file:///cfgdir/.cachekeeper/store"
    assert config.catalog == "sqlite:////cfgdir/.cachekeeper/catalog.db"
    assert (config.build_timeout, config.build_workers) == (1800.0, 2)
    assert config.backend_options_for("neuron") == {"logical_nc_config": "2"}
    assert config.backend_options_for("tpu") == {}


def test_backend_options_are_strings_with_yaml_booleans() -> None:
    config = parse(minimal(top_lines="backend_options:\n  inductor: {threads: 4, freezing: false, cc: g++}\n"))
    assert config.backend_options_for("inductor") == {"threads": "4", "freezing": "false", "cc": "g++"}


def test_backend_options_do_not_change_entry_keys() -> None:
    plain = parse(minimal()).entries()
    tuned = parse(minimal(top_lines="backend_options:\n  inductor: {device: cpu}\n")).entries()
    assert [e.spec.key for e in plain] == [e.spec.key for e in tuned]


def test_model_settings_default_to_a_transformer_component_without_warm_up_extras() -> None:
    (entry,) = parse(minimal()).entries()
    assert entry.model == ModelRef(name="m", component="transformer", path="/cfgdir/m")
    assert (entry.spec.mode, entry.spec.dtype, entry.spec.options) == ("full", "float32", ())
    assert entry.model.guidance is False


def test_model_settings_are_passed_to_the_model_ref() -> None:
    (entry,) = parse(minimal("    component: unet\n    inputs: my_pkg.warm:inputs\n    warmup: pipeline\n"
                             "    revision: v2\n")).entries()
    assert entry.model == ModelRef(name="m", component="unet", path="/cfgdir/m", revision="v2",
                                   inputs="my_pkg.warm:inputs", warmup="pipeline")
    assert (entry.spec.component, entry.spec.revision) == ("unet", "v2")


def test_per_model_values_replace_the_defaults() -> None:
    config = parse(minimal("    backends: [tpu]\n    modes: [eager]\n    dtypes: [bfloat16, float16]\n"
                           "    shapes: ['128x64x3']\n"))
    assert labels(config.entries()) == ["m/transformer tpu:eager 128x64x3 bfloat16,guidance=off,warmup=pipeline",
                                        "m/transformer tpu:eager 128x64x3 float16,guidance=off,warmup=pipeline"]


def test_explicit_shapes_accept_mappings_and_strings_with_batch_defaulting_to_one() -> None:
    config = parse(minimal("    shapes: [{height: 64, width: 128}, '64x64', '64x64x2',"
                           " {height: 8, width: 8, batch: 3}]\n"))
    assert config.models[0].shapes == (Shape(8, 8, 3), Shape(64, 64, 1), Shape(64, 64, 2), Shape(64, 128, 1))


def test_product_shapes_accept_single_values_and_default_batch_to_one() -> None:
    config = parse(minimal("    shapes: {height: 64, width: [64, 128]}\n"))
    assert config.models[0].shapes == (Shape(64, 64, 1), Shape(64, 128, 1))


def test_a_single_value_counts_as_a_one_item_list() -> None:
    config = parse(minimal("    backends: neuron\n    modes: eager\n    dtypes: bfloat16\n"))
    assert labels(config.entries()) == ["m/transformer neuron:eager 64x64x1 bfloat16,guidance=off,warmup=pipeline"]


def test_guidance_doubles_the_compiled_batch() -> None:
    config = parse(minimal("    guidance: true\n    shapes: ['64x64x1', '64x64x3']\n"))
    assert [e.spec.shape for e in config.entries()] == [Shape(64, 64, 2), Shape(64, 64, 6)]
    assert config.models[0].shapes == (Shape(64, 64, 1), Shape(64, 64, 3))   # the matrix keeps what was written


def test_the_build_reads_the_guidance_the_key_was_made_with() -> None:
    # one setting: the matrix's batch doubling and the build's CFG (ModelRef.guidance) cannot disagree
    (entry,) = parse(minimal("    guidance: true\n    warmup: pipeline\n")).entries()
    assert entry.model.guidance is True
    assert dict(entry.spec.options)["guidance"] == "on"
    matrix = ModelMatrix(model=ModelRef(name="m", component="unet", guidance=True), backends=("inductor",),
                         modes=("full",), dtypes=("float32",), shapes=(Shape(8, 8),))
    assert [e.spec.shape for e in matrix.entries()] == [Shape(8, 8, 2)]


def test_guided_batch_one_shares_the_key_of_unguided_batch_two() -> None:
    guided = parse(minimal("    guidance: true\n    shapes: ['64x64x1']\n")).entries()
    plain = parse(minimal("    shapes: ['64x64x2']\n")).entries()
    assert [e.spec.key for e in guided] == [e.spec.key for e in plain]


def test_tensor_parallel_above_one_adds_the_tp_option() -> None:
    (entry,) = parse(minimal("    tensor_parallel: 4\n")).entries()
    assert entry.spec.options == (("tp", "4"),)
    assert entry.model.tensor_parallel == 4


def test_tensor_parallel_of_one_adds_no_option() -> None:
    (entry,) = parse(minimal("    tensor_parallel: 1\n")).entries()
    assert entry.spec.options == ()


def test_per_backend_modes_apply_to_their_backend_only() -> None:
    config = parse(minimal("    backends: [inductor, neuron]\n"
                           "    modes: {inductor: [repeated_blocks], neuron: [eager], tpu: [eager]}\n"))
    assert labels(config.entries()) == ["m/transformer inductor:repeated_blocks 64x64x1 float32",
                                        "m/transformer neuron:eager 64x64x1 float32,guidance=off,warmup=pipeline"]
    assert config.models[0].modes == ("eager", "repeated_blocks")


def test_yaml_anchors_and_merge_keys_are_followed() -> None:
    config = parse("""\
        version: 1
        defaults: {backends: [inductor]}
        models:
          - &base {name: a, path: ./a, shapes: &s ['64x64']}
          - {<<: *base, name: b, shapes: *s}
    """)
    assert config.model_names() == ["a", "b"]
    assert config.models[1].model.path == "/cfgdir/a"


def test_an_aliased_mapping_with_a_merge_key_reads_the_same_each_time() -> None:
    config = parse("""\
        version: 1
        defaults: {backends: [inductor], shapes: &square {height: 64, width: 64}}
        models:
          - {name: a, path: ./a, shapes: &wide {<<: *square, width: 128}}
          - {name: b, path: ./b, shapes: *wide}
    """)
    assert [m.shapes for m in config.models] == [(Shape(64, 128, 1),), (Shape(64, 128, 1),)]


def test_a_matrix_built_in_code_still_expands_in_sorted_order() -> None:
    matrix = ModelMatrix(model=ModelRef(name="m", component="unet"), backends=("tpu", "inductor"),
                         modes=("full",), dtypes=("float32", "bfloat16"), shapes=(Shape(16, 8), Shape(8, 8)))
    assert labels(matrix.entries()) == [
        "m/unet inductor:full 8x8x1 bfloat16", "m/unet inductor:full 16x8x1 bfloat16",
        "m/unet inductor:full 8x8x1 float32", "m/unet inductor:full 16x8x1 float32",
        "m/unet tpu:full 8x8x1 bfloat16", "m/unet tpu:full 16x8x1 bfloat16",
        "m/unet tpu:full 8x8x1 float32", "m/unet tpu:full 16x8x1 float32",
    ]


@pytest.mark.parametrize(("backends", "models", "expected"), [
    ({"neuron"}, None, 4),
    ({"neuron", "inductor"}, None, 8),
    (None, {"tiny-flux"}, 4),
    ({"tpu"}, {"flux-dev"}, 2),
    ({"inductor"}, {"flux-dev"}, 0),   # both names exist, the model is just not built for that backend
    ("tpu", None, 2),                  # a bare string is one name, not a set of characters
])
def test_filters_select_backends_and_models(backends: set[str] | None, models: set[str] | None,
                                            expected: int) -> None:
    entries = parse(EXAMPLE).entries(backends=backends, models=models)
    assert len(entries) == expected
    assert all(backends is None or e.spec.backend in backends for e in entries)
    assert all(models is None or e.spec.model in models for e in entries)


def test_unknown_backend_filter_lists_the_configs_backends() -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.yaml: unknown backend 'neuron_xla' "
                                          r"\(the config has: inductor, neuron, tpu\)$"):
        parse(EXAMPLE).entries(backends={"neuron_xla"})


def test_unknown_model_filter_lists_the_configs_models() -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.yaml: unknown model 'flux' \(the config has: tiny-flux, flux-dev\)$"):
        parse(EXAMPLE).entries(models={"flux", "tiny-flux"})


def test_model_line_is_the_line_of_the_models_name() -> None:
    config = parse(EXAMPLE)
    assert (config.model_line("tiny-flux"), config.model_line("flux-dev")) == (15, 17)


def test_model_line_of_an_unknown_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no model named 'nope'"):
        parse(EXAMPLE).model_line("nope")


def test_the_documented_example_is_the_one_tested_here() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    assert doc.split("```yaml\n", 1)[1].split("```", 1)[0] == EXAMPLE
