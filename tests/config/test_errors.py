"""Every bad input is one ConfigError "cfg.yaml:LINE: message" whose LINE is the line marked `# <-`."""

from __future__ import annotations

import re

import pytest

from cachekeeper.errors import ConfigError

from .util import parse

HEAD = "version: 1\ndefaults: {backends: [inductor], shapes: ['64x64']}\nmodels:\n"
MODEL = HEAD + "  - name: a\n    path: ./a\n"   # a valid model (lines 4-5) that cases extend

CASES: dict[str, tuple[str, str]] = {
    # --- the document ---
    "malformed YAML reports yaml's own line": (
        "version: 1\nmodels:\n  - name: a\n    path: ./a\n   bad: indent  # <-\n",
        "invalid YAML: while parsing a block collection, expected <block end>"),
    "a tab in indentation": ("version: 1\n\tmodels: []  # <-\n",
                             "invalid YAML: while scanning for the next token, found character '\\t'"),
    "two documents": ("version: 1\n---  # <-\nmodels: []\n", "invalid YAML: expected a single document in the stream"),
    "a control character": ("version: 1\nmodels: \x01  # <-\n", "invalid YAML: special characters are not allowed"),
    "top level is a list": ("- version: 1  # <-\n", "the top level must be a mapping, got a list"),
    "top level is a string": ("just text  # <-\n", "the top level must be a mapping, got 'just text'"),
    "duplicate key": ("version: 1\nversion: 1  # <-\nmodels: []\n", "duplicate key 'version' in the top level "
                                                                     "(first at line 1)"),
    "merging a non-mapping": (MODEL + "    <<: 5  # <-\n",
                              "expected a mapping or list of mappings for merging, but found scalar"),
    "non-string key": ("version: 1\n1: x  # <-\n", "keys in the top level must be plain names, got 1"),
    # --- top-level keys ---
    "missing version": ("# a comment\nmodels: []  # <-\n", "missing required key 'version' (add `version: 1`)"),
    "version 2": ("version: 2  # <-\nmodels: []\n", "unsupported config version 2 (this cachekeeper reads version 1)"),
    "version as a string": ("version: '1'  # <-\n", "unsupported config version '1'"),
    "missing models": ("version: 1  # <-\n", "missing required key 'models'"),
    "models not a list": ("version: 1\nmodels: {a: 1}  # <-\n", "models must be a list of models, got a mapping"),
    "no models": ("version: 1\nmodels: []  # <-\n", "models is an empty list: nothing to build"),
    "unknown top-level key": ("version: 1\nmodel: []  # <-\n", "unknown key 'model' in the top level; "
                                                               "did you mean 'models'?"),
    "unknown build key": ("version: 1\nbuild:\n  timout: 5  # <-\n", "unknown key 'timout' in build; "
                                                                      "did you mean 'timeout'?"),
    "zero timeout": ("version: 1\nbuild: {timeout: 0}  # <-\n", "build.timeout must be positive, got 0"),
    "negative timeout": ("version: 1\nbuild:\n  timeout: -5  # <-\n", "build.timeout must be positive, got -5"),
    "timeout not a number": ("version: 1\nbuild:\n  timeout: soon  # <-\n",
                             "build.timeout must be a number of seconds, got 'soon'"),
    "infinite timeout": ("version: 1\nbuild:\n  timeout: .inf  # <-\n", "build.timeout must be a number of seconds"),
    "zero workers": ("version: 1\nbuild:\n  workers: 0  # <-\n", "build.workers must be at least 1, got 0"),
    "store with unknown scheme": ("version: 1\nstore: ftp://x/y  # <-\n", "unsupported store URL scheme 'ftp'"),
    "s3 store without bucket": ("version: 1\nstore: s3:///prefix  # <-\n", "store 's3:///prefix' names no bucket"),
    "catalog not a URL": ("version: 1\ncatalog: ./catalog.db  # <-\n", "catalog './catalog.db' is not a database URL"),
    "unknown backend in backend_options": ("version: 1\nbackend_options:\n  nueron: {}  # <-\n",
                                           "unknown key 'nueron' in backend_options; did you mean 'neuron'?"),
    "nested backend option value": ("version: 1\nbackend_options:\n  tpu: {args: [a]}  # <-\n",
                                    "backend_options.tpu.args must be a string, number or boolean, got a list"),
    "unknown defaults key": ("version: 1\ndefaults:\n  dtype: [float32]  # <-\n",
                             "unknown key 'dtype' in defaults; did you mean 'dtypes'?"),
    # --- models: identity and source ---
    "model not a mapping": (HEAD + "  - tiny-flux  # <-\n", "a model must be a mapping, got 'tiny-flux'"),
    "misspelt name": (HEAD + "  - path: ./a\n    nmae: a  # <-\n",
                      "unknown key 'nmae' in a model; did you mean 'name'?"),
    "model without name": (HEAD + "  - path: ./a  # <-\n", "a model is missing required key 'name'"),
    "bad model name": (HEAD + "  - name: 'my model'  # <-\n    path: ./a\n",
                       "model name 'my model' is not a valid name"),
    "model name not a string": (HEAD + "  - name: [a]  # <-\n", "model name must be a non-empty string, got a list"),
    "model without path or hub": (HEAD + "  - name: a  # <-\n    component: unet\n",
                                  "model 'a' needs 'path' (a local diffusers folder) or 'hub' (org/repo)"),
    "both path and hub": (MODEL + "    hub: org/a  # <-\n    revision: abc\n",
                          "model 'a' sets both 'path' and 'hub'; keep one"),
    "hub without revision": (HEAD + "  - name: a\n    hub: org/a  # <-\n",
                             "model 'a' from the hub needs a revision (a commit sha or tag)"),
    "hub with empty revision": (HEAD + "  - name: a\n    hub: org/a\n    revision: ''  # <-\n",
                                "model 'a' from the hub needs a revision"),
    "bad hub id": (HEAD + "  - name: a\n    hub: 'not a repo'  # <-\n    revision: abc\n",
                   "model 'a' hub 'not a repo' is not a hub repo id (org/repo)"),
    "duplicate model names": (MODEL + "  - name: a  # <-\n    path: ./b\n",
                              "duplicate model name 'a' (first at line 4)"),
    "unknown model key": (MODEL + "    backend: [neuron]  # <-\n",
                          "unknown key 'backend' in model 'a'; did you mean 'backends'?"),
    "unknown key without a close match lists the keys": (
        MODEL + "    zzz: 1  # <-\n",
        "unknown key 'zzz' in model 'a' (expected one of: backends, compile_modes, component, dtypes, guidance, hub, "
        "inputs, max_sequence_length, modes, name, offload, path, priority, revision, shapes, tensor_parallel, "
        "warmup)"),
    "tensor_parallel not an integer": (MODEL + "    tensor_parallel: two  # <-\n",
                                       "model 'a' tensor_parallel must be an integer, got 'two'"),
    "tensor_parallel zero": (MODEL + "    tensor_parallel: 0  # <-\n",
                             "model 'a' tensor_parallel must be at least 1, got 0"),
    "the first release's pipeline: true": (MODEL + "    pipeline: true  # <-\n",
                                           "model 'a' sets 'pipeline', which this release no longer reads; "
                                           "write 'warmup: pipeline' instead"),
    "store without a directory": ("version: 1\nstore: file://  # <-\n", "store 'file://' names no directory"),
    "guidance not a boolean": (MODEL + "    guidance: 2  # <-\n",
                               "model 'a' guidance must be true or false, got 2"),
    "bad component": (MODEL + "    component: trans-former  # <-\n",
                      "model 'a' component 'trans-former' is not a pipeline attribute name"),
    "unknown inputs builder": (MODEL + "    inputs: flxu  # <-\n",
                               "model 'a' inputs 'flxu' is neither a builder nor 'package.module:function'; "
                               "did you mean 'flux'?"),
    # --- matrix values ---
    "unknown backend": (MODEL + "    backends: [inductr]  # <-\n",
                        "unknown backend 'inductr'; did you mean 'inductor'?"),
    "unknown mode": (MODEL + "    modes:\n      - ful  # <-\n",
                     "unknown mode 'ful'; did you mean 'full'?"),
    "mode the backend does not support": (
        MODEL + "    modes:\n      - full\n      - eager  # <-\n",
        "mode 'eager' is not supported by backend 'inductor' (model 'a'; supported: full, repeated_blocks, aot)"),
    "default mode a model's backend does not support": (
        "version: 1\ndefaults:\n  modes: [defer_and_fuse]  # <-\n  shapes: ['64x64']\n"
        "models:\n  - {name: a, path: ./a, backends: [tpu]}\n  - {name: b, path: ./b, backends: [neuron]}\n",
        "mode 'defer_and_fuse' is not supported by backend 'neuron' (model 'b'"),
    "per-backend mode the backend does not support": (
        MODEL + "    modes: {inductor: [eager]}  # <-\n",
        "mode 'eager' is not supported by backend 'inductor' (model 'a' modes; supported: full, repeated_blocks, aot)"),
    "per-backend modes missing a backend": (
        MODEL + "    backends: [inductor, tpu]\n    modes:  # <-\n      inductor: [full]\n",
        "modes for model 'a' list no modes for backend 'tpu'"),
    "unknown dtype alias": (MODEL + "    dtypes: [float32, fp16]  # <-\n",
                            "unknown dtype 'fp16'; did you mean 'float16'?"),
    "unknown dtype": (MODEL + "    dtypes:\n      - int8  # <-\n",
                      "unknown dtype 'int8' (expected one of: bfloat16, float16, float32)"),
    "duplicate list value": (MODEL + "    dtypes:\n      - float32\n      - float32  # <-\n",
                             "duplicate value 'float32' in model 'a' dtypes (first at line 7)"),
    "model without shapes": ("version: 1\ndefaults: {backends: [inductor]}\nmodels:\n  - name: a  # <-\n"
                             "    path: ./a\n",
                             "model 'a' has no shapes; set defaults.shapes or shapes on the model"),
    "model without backends": ("version: 1\nmodels:\n  - name: a  # <-\n    path: ./a\n    shapes: ['64x64']\n",
                               "model 'a' has no backends; set defaults.backends or backends on the model"),
    # --- empty matrix ---
    "empty backends": (MODEL + "    backends: []  # <-\n",
                       "empty matrix: model 'a' backends is an empty list"),
    "empty default modes": ("version: 1\ndefaults:\n  modes: []  # <-\n",
                            "empty matrix: defaults.modes is an empty list"),
    "null dtypes": (MODEL + "    dtypes:  # <-\n",
                    "empty matrix: model 'a' dtypes has no values"),
    "empty shapes": (MODEL + "    shapes: []  # <-\n",
                     "empty matrix: model 'a' shapes is an empty list"),
    "empty product dimension": (MODEL + "    shapes:\n      height: []  # <-\n"
                                "      width: [64]\n", "empty matrix: model 'a' shapes.height is an empty list"),
    # --- shapes ---
    "height not a number": (MODEL + "    shapes: {height: big, width: 64}  # <-\n",
                            "height must be a positive integer, got 'big'"),
    "height as a float": (MODEL + "    shapes:\n      height: [64.0]  # <-\n"
                          "      width: 64\n", "height must be a positive integer, got 64.0"),
    "zero width": (MODEL + "    shapes:\n      height: 64\n      width: [64, 0]  # <-\n",
                   "width must be positive, got 0"),
    "negative batch": (MODEL + "    shapes:\n      - {height: 64, width: 64, batch: -1}  # <-\n",
                       "batch must be positive, got -1"),
    "height not a multiple of 8": (MODEL + "    shapes:\n      - height: 100  # <-\n"
                                   "        width: 64\n",
                                   "height 100 is not a multiple of 8 (diffusers latents need it)"),
    "string shape not a multiple of 8": (MODEL + "    shapes: ['768x1361x2']  # <-\n",
                                         "shape '768x1361x2': width 1361 is not a multiple of 8"),
    "string shape with zero batch": (MODEL + "    shapes:\n      - 64x64x0  # <-\n",
                                     "shape '64x64x0': batch must be positive, got 0"),
    "unparseable shape": (MODEL + "    shapes:\n      - 64 by 64  # <-\n",
                          "a shape in model 'a' shapes must be {height, width, batch} or 'HxWxB', got '64 by 64'"),
    "shape missing width": (MODEL + "    shapes:\n      - {height: 64}  # <-\n",
                            "a shape in model 'a' shapes is missing 'width'"),
    "product missing height": (MODEL + "    shapes:\n      width: 64  # <-\n",
                               "model 'a' shapes is missing 'height'"),
    "typo in product key": (MODEL + "    shapes:\n      heigth: [64]  # <-\n",
                            "unknown key 'heigth' in model 'a' shapes; did you mean 'height'?"),
    "duplicate shape": (MODEL + "    shapes: ['64x64', '64x64x1']  # <-\n",
                        "duplicate value Shape(height=64, width=64, batch=1) in model 'a' shapes"),
}


def marked_line(text: str) -> int:
    (line,) = [n for n, row in enumerate(text.splitlines(), start=1) if row.endswith("# <-")]
    return line


@pytest.mark.parametrize(("text", "message"), CASES.values(), ids=list(CASES))
def test_bad_input_names_the_marked_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert str(caught.value).startswith(f"cfg.yaml:{marked_line(text)}: {message}")


@pytest.mark.parametrize("text", [text for text, _ in CASES.values()], ids=list(CASES))
def test_every_message_is_one_line(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert "\n" not in str(caught.value)


def test_empty_file_is_an_error_at_line_one() -> None:
    with pytest.raises(ConfigError, match=re.escape("cfg.yaml:1: the config is empty")):
        parse("# nothing here\n")


def test_the_cli_hint_for_a_config_error_names_validate() -> None:
    # library errors name no command; the CLI's table (cli/hints.py) adds the next step
    from cachekeeper.cli.hints import hint_for

    with pytest.raises(ConfigError) as caught:
        parse("version: 2\n")
    assert "cachekeeper validate" in hint_for(caught.value)


def test_the_base_model_of_the_table_is_valid() -> None:
    """Guards the table above: its errors come from the lines it adds, not from MODEL."""
    assert parse(MODEL).model_names() == ["a"]
