"""What ``collect()`` gives: an openai ``ChatCompletion`` when openai is importable, else
the dict."""

from typing import Any, Dict

try:
    from openai.types.chat import ChatCompletion as _ChatCompletion
except ImportError:  # openai is optional
    _ChatCompletion = None


def chat_completion(completion: Dict[str, Any]) -> Any:
    """The completion (a dict in the shape of a ``chat.completion``) as a ``ChatCompletion``.

    Validated when it validates; otherwise (a choice cut short has ``finish_reason: None``,
    which the model does not allow) built without validation, as openai-python builds the
    responses it receives."""
    if _ChatCompletion is None:
        return completion
    try:
        return _ChatCompletion.model_validate(completion)
    except Exception:
        try:
            from openai._models import construct_type

            return construct_type(type_=_ChatCompletion, value=completion)
        except Exception:
            return _ChatCompletion.model_construct(**completion)
