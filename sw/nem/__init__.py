"""NEM execution plans: language toolkit, executor and cycle model, binder, task format."""
