/* An inetd service written with stdio: each line read from stdin comes back
 * on stdout as "got: " and the line, until the end of the input. Leaves by
 * returning from main, so exit flushes stdout (tests/integration/xinetd.sh). */
#include <stdio.h>

int main(void)
{
	char line[4096];
	while (fgets(line, sizeof(line), stdin))
		printf("got: %s", line);
	return ferror(stdin) ? 1 : 0;
}
