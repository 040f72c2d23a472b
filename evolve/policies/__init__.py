"""Language-model policies: the Policy protocol (base), model files (model_files) and the local backends (llamacpp,
hf).

Importing this package bounds how long idle OpenMP threads spin before they sleep (GOMP_SPINCOUNT=10000, a few
microseconds, unless set), which must happen before torch or llama.cpp loads the OpenMP runtime they share. A run
shares its cores with sandboxed evaluations: threads spinning for libgomp's default 300,000 turns took generation on
2 busy cores from ~10 to ~1.5 tokens/s (torch), while threads that sleep at once (OMP_WAIT_POLICY=PASSIVE) made
llama.cpp's decode 2.5x slower on idle cores (22 against 55 tokens/s: it waits at a barrier after every operation).
"""

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")
