"""What ``collect()`` and ``usage()`` give: openai's ``ChatCompletion`` and a
``choicewise.Usage`` (openai's ``CompletionUsage``) when openai is importable, else the dicts."""

from typing import Any, Dict, Optional, Type

_ChatCompletion: Optional[Type[Any]]
_Usage: Optional[Type[Any]]
try:
    from openai.types.chat import ChatCompletion as _ChatCompletion

    from ._openai_types import Usage as _Usage
except ImportError:  # openai is optional
    _ChatCompletion = None
    _Usage = None


def _model(cls: Type[Any], value: Dict[str, Any]) -> Any:
    """``value`` as a ``cls``: validated when it validates; otherwise (a choice cut short has
    ``finish_reason: None``, which the model does not allow) built without validation, as
    openai-python builds the responses it receives."""
    try:
        return cls.model_validate(value)
    except Exception:
        try:
            from openai._models import construct_type

            return construct_type(type_=cls, value=value)
        except Exception:
            return cls.model_construct(**value)


def chat_completion(completion: Dict[str, Any]) -> Any:
    """The completion (a dict in the shape of a ``chat.completion``) as a ``ChatCompletion``."""
    if _ChatCompletion is None:
        return completion
    return _model(_ChatCompletion, completion)


def usage(value: Dict[str, Any]) -> Any:
    """The usage (a dict in the shape of openai's ``usage`` plus ``source``) as a
    ``choicewise.Usage``."""
    if _Usage is None:
        return value
    return _model(_Usage, value)
