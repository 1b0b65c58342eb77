"""Spiders bundled with ipr-crawl."""
