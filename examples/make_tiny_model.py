"""Build tiny diffusers models from config (random weights, fixed seed) for tests, demos and benchmarks.

No hub access: the architectures are the real FluxTransformer2DModel / UNet2DConditionModel classes, just
small enough that a CPU compiles them in under a minute. Output layout matches a pipeline folder:
<out>/<name>/<component>/{config.json,diffusion_pytorch_model.safetensors}.

    python examples/make_tiny_model.py                # both models into examples/models/
    python examples/make_tiny_model.py --out DIR --only tiny-flux
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 0

# Real FLUX.1-dev structure (guidance embedding, 2x2 packed latents of 4 channels -> 16) at toy width.
TINY_FLUX: dict[str, Any] = dict(
    patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=True,
    axes_dims_rope=(4, 6, 6),  # must sum to attention_head_dim
)

TINY_UNET: dict[str, Any] = dict(
    sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32,
)


def make_flux(dest: Path) -> Path:
    import torch
    from diffusers import FluxTransformer2DModel

    cls: Any = FluxTransformer2DModel  # diffusers is untyped
    torch.manual_seed(SEED)
    out = dest / "tiny-flux" / "transformer"
    cls(**TINY_FLUX).save_pretrained(out)
    return out


def make_unet(dest: Path) -> Path:
    import torch
    from diffusers import UNet2DConditionModel

    cls: Any = UNet2DConditionModel
    torch.manual_seed(SEED)
    out = dest / "tiny-unet" / "unet"
    cls(**TINY_UNET).save_pretrained(out)
    return out


MAKERS = {"tiny-flux": make_flux, "tiny-unet": make_unet}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "models", help="parent folder (default examples/models)")
    ap.add_argument("--only", choices=sorted(MAKERS), action="append", help="build only this model (repeatable)")
    args = ap.parse_args(argv)
    for name in args.only or sorted(MAKERS):
        print(MAKERS[name](args.out))


if __name__ == "__main__":
    main()
