"""Language-model policies: the Policy protocol (base), model files (model_files) and the local backend (hf).

Importing this package makes OpenMP threads sleep rather than spin when idle (OMP_WAIT_POLICY=PASSIVE,
unless already set), which must happen before torch loads. A run shares its cores with sandboxed
evaluations; with spinning threads, generation on 2 busy cores fell from ~10 to ~1.5 tokens/s, while
on idle cores PASSIVE costs about 20% of batched throughput.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
