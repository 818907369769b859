"""Build tiny diffusers models and pipelines from config (random weights, fixed seed) for tests, demos and
benchmarks.

No hub access: the architectures are the real diffusers/transformers classes, just small enough that a CPU
compiles them in under a minute. Tokenizers are the families' own classes over a byte-level vocabulary
built here with the `tokenizers` alphabet, so any prompt tokenizes and nothing is downloaded.

Components only (layout <out>/<name>/<component>/{config.json,diffusion_pytorch_model.safetensors}):
    tiny-flux (FluxTransformer2DModel), tiny-unet (UNet2DConditionModel)
Whole pipelines (`save_pretrained` layout with model_index.json):
    tiny-flux2-klein (Flux2KleinPipeline, Qwen3 text encoder), tiny-flux1 (FluxPipeline, CLIP + T5),
    tiny-sd3 (StableDiffusion3Pipeline), tiny-sdxl (StableDiffusionXLPipeline)

    python examples/make_tiny_model.py                # everything into examples/models/
    python examples/make_tiny_model.py --out DIR --only tiny-flux2-klein
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
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

# FLUX.2: no pooled projections, 4-axis rope ids, text features = 3 stacked Qwen3 hidden layers.
QWEN3_HIDDEN = 16
TINY_FLUX2: dict[str, Any] = dict(
    patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=3 * QWEN3_HIDDEN, timestep_guidance_channels=16,
    mlp_ratio=2.0, axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False,
)
# Flux2KleinPipeline reads hidden layers (9, 18, 27) by default: 27 layers, each a few hundred parameters.
TINY_QWEN3: dict[str, Any] = dict(
    hidden_size=QWEN3_HIDDEN, intermediate_size=32, num_hidden_layers=27, num_attention_heads=2,
    num_key_value_heads=1, head_dim=8, max_position_embeddings=1024, tie_word_embeddings=True,
)
# Four VAE blocks: the real 8x downsampling (so a 64x64 image is 8x8 latents), at 16 channels.
TINY_VAE: dict[str, Any] = dict(
    in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 16, 16, 16), layers_per_block=1,
    norm_num_groups=8, sample_size=64,
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
)
TINY_CLIP: dict[str, Any] = dict(
    hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, projection_dim=32,
    max_position_embeddings=77, hidden_act="gelu", bos_token_id=0, eos_token_id=1, pad_token_id=1,
)
TINY_T5: dict[str, Any] = dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8)
CLIP_LEN = 77
FLUX_VAE_SCALING = dict(scaling_factor=0.3611, shift_factor=0.1159)  # FLUX.1/SD3 VAEs shift latents


# --- tokenizers: the families' classes over a small byte-level vocabulary ------------------------------


def _byte_chars() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def qwen_tokenizer() -> Any:
    from transformers import Qwen2Tokenizer

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(special + _byte_chars())}
    tok: Any = Qwen2Tokenizer(vocab=vocab, merges=[])
    # The Qwen chat layout Flux2KleinPipeline formats prompts with (apply_chat_template).
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tok


def clip_tokenizer() -> Any:
    from transformers import CLIPTokenizer

    chars = _byte_chars()
    vocab = {t: i for i, t in enumerate(["<|startoftext|>", "<|endoftext|>", *chars, *(c + "</w>" for c in chars)])}
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=CLIP_LEN)


def t5_tokenizer() -> Any:
    from transformers import T5Tokenizer

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -1.0)]
    pieces += [(c, -2.0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.!?'-"]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


def clip_encoder(projection: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(vocab_size=len(clip_tokenizer()), **TINY_CLIP)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config)


def t5_encoder() -> Any:
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=len(t5_tokenizer()), **TINY_T5))


# --- components ------------------------------------------------------------------------------------------


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


# --- pipelines ---------------------------------------------------------------------------------------------


def _save(pipe: Any, out: Path) -> Path:
    pipe.save_pretrained(out, safe_serialization=True)
    return out


def make_flux2_klein(dest: Path) -> Path:
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(SEED)
    tok = qwen_tokenizer()
    vae_cfg = {k: v for k, v in TINY_VAE.items() if k != "latent_channels"}
    pipe: Any = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=AutoencoderKLFlux2(latent_channels=TINY_FLUX2["in_channels"] // 4, **vae_cfg),
        text_encoder=Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), **TINY_QWEN3)),
        tokenizer=tok,
        transformer=Flux2Transformer2DModel(**TINY_FLUX2),
    )
    return _save(pipe, dest / "tiny-flux2-klein")


def make_flux1(dest: Path) -> Path:
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(SEED)
    pipe: Any = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True),
        vae=AutoencoderKL(**TINY_VAE, **FLUX_VAE_SCALING),
        text_encoder=clip_encoder(projection=False), tokenizer=clip_tokenizer(),
        text_encoder_2=t5_encoder(), tokenizer_2=t5_tokenizer(),
        transformer=FluxTransformer2DModel(**TINY_FLUX),
    )
    return _save(pipe, dest / "tiny-flux1")


def make_sd3(dest: Path) -> Path:
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    torch.manual_seed(SEED)
    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=1, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=64,
        pos_embed_max_size=16,
    )
    pipe: Any = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=AutoencoderKL(**TINY_VAE, **FLUX_VAE_SCALING),
        text_encoder=clip_encoder(projection=True), tokenizer=clip_tokenizer(),
        text_encoder_2=clip_encoder(projection=True), tokenizer_2=clip_tokenizer(),
        text_encoder_3=t5_encoder(), tokenizer_3=t5_tokenizer(),
    )
    return _save(pipe, dest / "tiny-sd3")


def make_sdxl(dest: Path) -> Path:
    import torch
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel

    torch.manual_seed(SEED)
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=64, attention_head_dim=(2, 4), norm_num_groups=32, use_linear_projection=True,
        addition_embed_type="text_time", addition_time_embed_dim=8, transformer_layers_per_block=(1, 1),
        projection_class_embeddings_input_dim=32 + 6 * 8,  # pooled text (32) + 6 time ids x 8
    )
    pipe: Any = StableDiffusionXLPipeline(
        vae=AutoencoderKL(**TINY_VAE), unet=unet, scheduler=EulerDiscreteScheduler(),
        text_encoder=clip_encoder(projection=False), tokenizer=clip_tokenizer(),
        text_encoder_2=clip_encoder(projection=True), tokenizer_2=clip_tokenizer(),
    )
    return _save(pipe, dest / "tiny-sdxl")


MAKERS: dict[str, Callable[[Path], Path]] = {
    "tiny-flux": make_flux, "tiny-unet": make_unet, "tiny-flux2-klein": make_flux2_klein,
    "tiny-flux1": make_flux1, "tiny-sd3": make_sd3, "tiny-sdxl": make_sdxl,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "models", help="parent folder (default examples/models)")
    ap.add_argument("--only", choices=sorted(MAKERS), action="append", help="build only this model (repeatable)")
    args = ap.parse_args(argv)
    for name in args.only or sorted(MAKERS):
        print(MAKERS[name](args.out))


if __name__ == "__main__":
    main()
