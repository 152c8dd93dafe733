# bench: build fragment, included from Makefile.am
