"""Math as multi-attempt text environments: Countdown, GSM-Symbolic, CHAMP, GSM8K, MATH-500, OlympiadBench."""
