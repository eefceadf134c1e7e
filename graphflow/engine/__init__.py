"""The superstep executor: plan (pure), run tasks, apply writes (pure), commit."""
