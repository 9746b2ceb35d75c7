"""s3:// images through the media loader, from the local moto S3 server: fetched once into the
s3:// cache, then read from it; a missing key or a folder is a counted s3_error, not a traceback."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from posttrain.data.media import MediaError, MediaSettings, load_images


def png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (5, 4), color).save(buf, format="PNG")
    return buf.getvalue()


def test_s3_images_load_once_and_bad_uris_are_s3_errors(s3, bucket, moto_server, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{moto_server[0]}:{moto_server[1]}")
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    s3.put_object(Bucket=bucket, Key="imgs/a.png", Body=png((1, 2, 3)))
    s3.put_object(Bucket=bucket, Key="imgs/b.png", Body=png((4, 5, 6)))
    settings = MediaSettings(retries=1, backoff_s=0.01)
    images = load_images([f"s3://{bucket}/imgs/a.png", f"s3://{bucket}/imgs/b.png"], settings=settings)
    assert [im.getpixel((0, 0)) for im in images] == [(1, 2, 3), (4, 5, 6)] and images[0].size == (5, 4)

    s3.delete_object(Bucket=bucket, Key="imgs/a.png")  # now served from the cache only
    assert load_images(f"s3://{bucket}/imgs/a.png", settings=settings)[0].getpixel((0, 0)) == (1, 2, 3)

    for uri in (f"s3://{bucket}/imgs/missing.png", f"s3://{bucket}/imgs", f"s3://{bucket}-nope/a.png"):
        with pytest.raises(MediaError) as e:
            load_images(uri, settings=settings)
        assert e.value.reason == "s3_error" and uri.rstrip("/") in e.value.detail
        assert "fake-secret" not in e.value.detail
