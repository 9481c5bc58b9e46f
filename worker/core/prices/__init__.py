"""The price book: rows, the rule that picks one, the one charge function, and the file formats.

``price`` holds a row and its charge, ``book`` the rule that picks a row for a call, ``toml_book`` and
``litellm`` the two file formats, ``bundled`` the default book, ``merge`` how imports join it and
``snapshot`` the generator of the bundled list. All pure: the database side is
``worker.consumer.pricing``.
"""

from worker.core.prices.book import PriceBook, Resolution, normalize_provider, normalize_tier
from worker.core.prices.bundled import load_price_book
from worker.core.prices.price import MAX_PRICE, Band, Layer, Price
from worker.core.prices.toml_book import prices_from_toml

__all__ = [
    "MAX_PRICE",
    "Band",
    "Layer",
    "Price",
    "PriceBook",
    "Resolution",
    "load_price_book",
    "normalize_provider",
    "normalize_tier",
    "prices_from_toml",
]
