"""A name -> model-class registry, so scripts and configs can say ``"transformer"`` instead of
importing a class (the pattern of timm's and Hugging Face's model factories)."""

from __future__ import annotations

from typing import Any, Callable


class ModelRegistry:
    """``@ModelRegistry.register("name")`` on a class; ``ModelRegistry.create("name", config)``."""

    _models: dict[str, type] = {}

    @classmethod
    def register(cls, name: str) -> Callable[[type], type]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"model name must be a non-empty string, got {name!r}")

        def decorator(model_cls: type) -> type:
            existing = cls._models.get(name)
            if existing is not None and existing is not model_cls:
                raise ValueError(f"model name {name!r} is already registered to {existing.__name__}")
            cls._models[name] = model_cls
            return model_cls

        return decorator

    @classmethod
    def create(cls, name: str, config: Any, **kwargs: Any) -> Any:
        """Instantiate the model registered as ``name`` with ``config`` (and extra arguments)."""
        if name not in cls._models:
            raise ValueError(f"unknown model {name!r}; available models: {', '.join(cls.list_models())}")
        return cls._models[name](config, **kwargs)

    @classmethod
    def list_models(cls) -> list[str]:
        return sorted(cls._models)

    @classmethod
    def is_registered(cls, name: str) -> bool:
        return name in cls._models
