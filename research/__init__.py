"""Research: directions measured against kbpg's search, outside the product (README.md)."""
