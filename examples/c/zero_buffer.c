/* Zero a large buffer with the fastest clear this CPU has. */
#include <prezero.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	size_t len = 64 << 20;
	unsigned char *buf = malloc(len);
	if (!buf)
		return 1;
	memset(buf, 0xa5, len);
	int rc = pz_clear(buf, len); /* Auto: kernel chosen once per size class */
	if (rc == 0)
		rc = pz_clear_strategy(buf, len, PZ_STRATEGY_AUTO_COLD); /* memory not in cache */
	if (rc < 0) {
		fprintf(stderr, "pz_clear: %s\n", pz_strerror(rc));
		return 1;
	}
	printf("prezero %s cleared %zu MiB; last byte %d\n", pz_version(), len >> 20, buf[len - 1]);
	free(buf);
	return 0;
}
