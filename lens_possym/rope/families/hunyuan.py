"""HunYuan dense: refused."""

from . import Family

FAMILY = Family(attention=("HunYuanDenseV1Attention",), refused=(
    "HunYuan normalises q and k *after* RoPE with a per-dimension gain, so its scores are not "
    "rotations of fixed query and key vectors and do not split per frequency"))
