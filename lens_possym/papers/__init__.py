"""The papers lens-possym reproduces, each a plug-in (:mod:`lens_possym.plugins`) on the
core: paper A (:mod:`.a`: canonical tasks, the frequency-controlled toy model, hand-built
heads, frequency sweeps), paper B (:mod:`.b`: distance and count tasks, scheme encoders,
the deposit experiments), paper C (:mod:`.c`: Number and Letter, GPT-J, learning dynamics,
head roles, discrepancy, length generalisation, 1-hop prompts).

Nothing outside this package imports it, and ``import lens_possym`` does not: the core
finds the papers' tasks, models and commands through the ``lens_possym.plugins`` entry
points that ``pyproject.toml`` declares, as it would find a fourth paper's
(``docs/adding_a_paper.md``). Each paper's package imports nothing heavy until one of its
names is used (``from lens_possym.papers.c import NumberTask``).
"""
