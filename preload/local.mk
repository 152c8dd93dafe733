# preload: build fragment, included from Makefile.am
