"""The API's `continuation` and `image_fit` reach the spec, and a bad value is a 400 naming the field."""

import pytest

from videogen.api.catalog import invalid
from videogen.api.schemas import CreateParams
from videogen.api.videos import spec_from_params
from videogen.config.resolve import resolve_render
from videogen.errors import InvalidOption


def test_continuation_and_image_fit_reach_the_resolved_render():
    spec = spec_from_params(CreateParams(prompt="a red circle", seconds=2, continuation="renoise", image_fit="contain"))
    resolved = resolve_render(spec)
    assert (resolved.continuation, resolved.image_fit) == ("renoise", "contain")
    default = resolve_render(spec_from_params(CreateParams(prompt="a red circle", seconds=2)))
    assert (default.continuation, default.image_fit) == ("clean", "cover")  # the builtin preset's, and cover


@pytest.mark.parametrize("field, value", [("continuation", "noisy"), ("image_fit", "fill")])
def test_a_bad_value_is_a_400_naming_the_field(field, value):
    spec = spec_from_params(CreateParams(prompt="a red circle", seconds=2, **{field: value}))
    with pytest.raises(InvalidOption) as err:
        resolve_render(spec)
    error = invalid(err.value)
    assert error.status == 400 and error.param == field
