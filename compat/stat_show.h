/* ferry-stat's output: the view as a table for people or JSON for scripts. */
#ifndef FERRY_COMPAT_STAT_SHOW_H
#define FERRY_COMPAT_STAT_SHOW_H

#include <stdio.h>

#include "compat/stat_read.h"

void stat_show_text(FILE *out, const struct stat_view *v);
/* One document: {"processes": [ {...}, ... ]}. */
void stat_show_json(FILE *out, const struct stat_view *v);

#endif
