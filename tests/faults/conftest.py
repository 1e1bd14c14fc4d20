import pytest


@pytest.fixture
def workspace(api_key, s3_bucket):
    return api_key.workspace
