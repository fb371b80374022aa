"""Package data: the model presets (`models.yaml`), installed as `videogen.configs`."""
