"""Prediction: a discrete-event model of the device's stream scheduler (no torch)."""
