# tests/preload.mk
