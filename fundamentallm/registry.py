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
    def builtin_class(cls, class_name: str) -> Any:
        """The package's registered class called ``class_name`` (how a checkpoint names its
        model's class), or None. Classes registered from elsewhere (a chapter's own
        ``Transformer``) never shadow the package's."""
        for model_cls in cls._models.values():
            if model_cls.__name__ == class_name and model_cls.__module__.startswith("fundamentallm."):
                return model_cls
        return None

    @classmethod
    def builtin_classes(cls) -> list[str]:
        return sorted({m.__name__ for m in cls._models.values() if m.__module__.startswith("fundamentallm.")})

    @classmethod
    def list_models(cls) -> list[str]:
        return sorted(cls._models)

    @classmethod
    def is_registered(cls, name: str) -> bool:
        return name in cls._models
