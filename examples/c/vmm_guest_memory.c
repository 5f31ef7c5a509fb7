/*
 * What a VMM does with prezero serve: ask for guest memory, get it mapped,
 * populated and zero in one call, and hand its memfds to vhost-user backends.
 * Falls back to local memory (and says why) when no service is running.
 *
 *   PREZERO_SOCKET=/run/prezero/prezero.sock ./vmm_guest_memory [MiB]
 */
#include <prezero.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
	struct pz_service *svc = NULL;
	int rc = pz_service_connect(NULL, &svc); /* NULL: $PREZERO_SOCKET or the default */
	if (rc < 0)
		printf("no service (%s): guest memory will be local\n", pz_strerror(rc));

	struct pz_service_memory *mem = NULL;
	int source;
	rc = pz_service_alloc(svc, bytes, PZ_PAGE_HUGE_2M, 0, &mem, &source);
	if (rc < 0) {
		fprintf(stderr, "pz_service_alloc: %s\n", pz_strerror(rc));
		return 1;
	}
	void *guest = pz_service_memory_ptr(mem);
	size_t len = pz_service_memory_len(mem);
	printf("%zu MiB of guest memory from %s\n", len >> 20,
	       source == PZ_SOURCE_SERVICE ? "prezero serve" : "local memory");

	/* A vhost-user memory table: one region per segment (fd, offset, size). */
	int fd;
	size_t offset, size;
	for (size_t i = 0; pz_service_segment(mem, i, &fd, &offset, &size) == 0; i++)
		printf("  region %zu: fd %d, guest offset %zu MiB, %zu MiB\n", i, fd, offset >> 20,
		       size >> 20);

	const unsigned char *p = guest;
	for (size_t i = 0; i < len; i += 4096)
		if (p[i] != 0) {
			fprintf(stderr, "guest memory not zero at %zu\n", i);
			return 1;
		}
	pz_service_free(mem);
	if (svc)
		pz_service_disconnect(svc);
	return 0;
}
