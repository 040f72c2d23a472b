"""The study pipeline (`evolve study FILE`): train, sample, evolve and report in stages, above the engine, rl and
report packages it drives; `config.py` is the file's model, `plan.py` what each stage runs, `pipeline.py` the stages
(`training_stage.py`, `evolution_stage.py`: where stages 1 and 3 stand and their pace; `report_stage.py`: stage 4)."""
