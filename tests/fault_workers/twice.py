"""Logs every step twice, as two ranks without a rank prefix do; exits 0 (a 'successful'
process whose log breaks the strict rules)."""

for step in range(1, 7):
    for _rank in range(2):
        print(
            f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
            f"elapsed_time_per_step: {0.01 * (1 + step % 3):.6f}s",
            flush=True,
        )
