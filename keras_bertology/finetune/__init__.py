"""Fine-tuning: task heads on every encoder, downstream data and their metrics."""
