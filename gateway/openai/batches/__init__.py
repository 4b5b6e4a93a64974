"""OpenAI's Batch API over the queue: lines (the input checked), runner (fed in spare capacity), answers, routes."""
