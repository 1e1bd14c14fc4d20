"""The official SDK against the live server: authentication and the simplest list."""

import anthropic
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_wrong_key_raises_authentication_error(live_server, api_key):
    client = anthropic.Anthropic(
        base_url=live_server.url, api_key="sk-mango-wrong", max_retries=0, _strict_response_validation=True
    )
    with pytest.raises(anthropic.AuthenticationError) as excinfo:
        client.beta.files.list()
    assert excinfo.value.status_code == 401
    assert excinfo.value.request_id.startswith("req_")


def test_good_key_lists_an_empty_page(sdk, s3_bucket):
    page = sdk.beta.files.list()
    assert page.data == [] and page.next_page is None
    assert list(sdk.files.list()) == []
