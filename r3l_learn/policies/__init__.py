"""Policies: Hugging Face, vLLM, OpenAI-compatible servers, Ray, scripted; models and devices."""
