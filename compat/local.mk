# compat: build fragment, included from Makefile.am
