"""Logs two steps, then dies with an uncaught exception (exit status 1)."""

for step in (1, 2):
    print(f"step: {step:2d}  loss: 1.00000  elapsed_time_per_step: 0.010000s", flush=True)
raise RuntimeError("injected crash after step 2")
