# tests/softib.mk
