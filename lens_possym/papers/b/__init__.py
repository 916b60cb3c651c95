"""Paper B: the Toeplitz view of positional encodings and the deposit pattern.

Its synthetic side: the distance and count tasks (:mod:`.tasks`), the encoder with every
positional scheme (:mod:`.encoder`: NoPE, absolute, ALiBi, T5, RoPE, partial RoPE, MLA, the
hybrid; intended and faithful variants), and the experiments (:mod:`.experiments`:
presets, cells, the ablation grid, the deposit summary, the positional probe); the
``lens-possym encoder`` command. (The Toeplitz decomposition of a head's logits is the
core's: :mod:`lens_possym.positions.toeplitz`.)
"""

from ...plugins import Plugin, lazy_attributes

PLUGIN = Plugin(
    name="paper-b",
    title="Positional encodings as Toeplitz kernels; the deposit pattern",
    tasks={"distance": "lens_possym.papers.b.tasks:DistanceTask",
           "count": "lens_possym.papers.b.tasks:CountTask"},
    models={"scheme-encoder": "lens_possym.papers.b.encoder:SchemeEncoder"},
    commands=("lens_possym.papers.b.cli",),
)

_EXPORTS = {
    "tasks": ["DistanceTask", "CountTask"],
    "encoder": ["EncoderConfig", "SchemeEncoder", "SCHEMES", "VARIANTS", "encoder_config_for"],
    "experiments": ["Preset", "ENCODER_PRESETS", "Cell", "parse_label", "preset_task",
                    "train_cell", "analyse_cell",
                    "ablation_grid", "deposit_summary", "positional_probe", "encoder_profile"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
__all__ = ["PLUGIN", *(name for names in _EXPORTS.values() for name in names)]
