"""The app catalog: ready-made templates instances and services start from."""
